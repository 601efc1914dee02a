"""Consumer-group processes: command processor, evaluator, delivery (thin loops over the rules)."""
