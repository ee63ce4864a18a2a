"""agentfn page function."""
