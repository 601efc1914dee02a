"""The HTTP API: a FastAPI adapter over the control-plane core (DESIGN §9)."""
