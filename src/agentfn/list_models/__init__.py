"""agentfn list_models function."""
