"""vLLM: its ``vllm serve`` command line (:mod:`.servecmd`, :mod:`.configfile`), the KV tiers its
kv-transfer-config names (:mod:`.kvconfig`), its API's reset routes and answers (:mod:`.api`,
:mod:`.canary`), its live configuration (:mod:`.liveconfig`) and image versions
(:mod:`.imagever`)."""
