"""Model wrappers: how each backend wraps the model, steps the optimizer and saves state."""
