"""The Wyoming side: text clean-up and sentence splitting, the voice catalogue, the event handler."""
