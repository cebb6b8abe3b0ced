"""``python -m sim``: the command line. Parses and validates arguments, then calls the other
subpackages; nothing else imports it.
"""
