"""The transport-agnostic control-plane core and its socket and HTTP adapters."""
