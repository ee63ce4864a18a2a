"""agentfn run_code function."""
