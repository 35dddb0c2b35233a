"""SGLang's HTTP server as an engine (:class:`.engine.SglangEngine`); its command line in :mod:`.cmdline`."""
