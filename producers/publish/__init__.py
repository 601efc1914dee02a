"""The publish stage: the SDK upstream services use to put events on ``events``."""
