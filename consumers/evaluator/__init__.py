"""The evaluator stage: events and ticks in, decisions, receipts, outbox entries and
checkpoints out, in one Kafka transaction (DESIGN §2, §3, §11)."""
