"""The local control socket: JSON lines over a 0600 Unix socket (seed 001)."""
