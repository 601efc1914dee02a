"""The delivery stage: outbox entries claimed, sent at least once through an adapter, and
recorded, with retries, quiet hours and per-window budgets (DESIGN §4)."""
