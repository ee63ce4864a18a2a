"""agentfn memory: entries per subject (facts, preferences, episodes), embedded and recalled with their sources."""
