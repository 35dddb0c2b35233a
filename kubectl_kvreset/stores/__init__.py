"""The shared stores outside the vLLM pods (README "clear-store"): finding them, resolving their addresses.

* :mod:`.config` (pure): from a vLLM pod's configuration (``kv_connector_extra_config``,
  ``LMCACHE_*`` env, the ``LMCACHE_CONFIG_FILE`` YAML, the MP connector's server address,
  Mooncake's ``MOONCAKE_CONFIG_PATH`` JSON) to :class:`~.config.StoreUse` records.
* :mod:`.resolve` (pure): an address to a Service or pod of the cluster, or "outside".
* :mod:`.find`: the API reads that feed both (ConfigMaps, Secrets, Services, EndpointSlices,
  pods), grouping the pods that use each store.
"""
