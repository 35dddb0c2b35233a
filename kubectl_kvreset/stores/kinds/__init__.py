"""The store kinds: one module per kind, each a :class:`~.base.Kind` subclass; the registry
that lists them is :mod:`kubectl_kvreset.stores.registry`."""
