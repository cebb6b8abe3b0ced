"""From a user's vLLM configuration to the code path it takes and how often it corrupts.

``release_facts`` (what each release's source says, with file and line), ``rules`` (the
decisions built on those facts), ``resolution`` (configuration -> code path and the trace of
rules that fired), ``check`` (a chosen policy against the configuration), ``presets`` (model
timing from a roofline), ``risk`` (simulated corruption rates and mitigations) and
``field_reports`` (public reports beside the prediction). May import model, runs, explore.
"""
