"""The referee suite: a real vLLM (the CPU build, random weights) judges the simulator's fake."""
