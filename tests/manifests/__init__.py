"""Manifests the tests load: the YAML files of this directory, and :mod:`tests.manifests.build`,
the builder of the small Deployments the end-to-end tests write."""
