"""The model edge: every call to a model (summarize, extract facts, rephrase) and its policy."""
