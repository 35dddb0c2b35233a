"""kubectl-kvreset: empty every KV cache tier of the vLLM servers in a Kubernetes deployment."""

__version__ = "0.1.0"
