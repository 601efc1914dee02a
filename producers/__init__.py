"""Producers: the event publisher SDK, the poll ticker, governed tools and pinned evaluators."""
