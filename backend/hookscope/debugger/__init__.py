"""Glue with debugpy: pausing at a stop and where the editor shows it, tensors in the Variables view, values shown from any paused frame, starting a script with the agent."""
