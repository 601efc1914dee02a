"""The exactly-once stream runtime, one collaborator per module: ``app`` (the StreamApp that
wires them), ``member`` (the clients), ``transactions`` (the TransactionScope), ``assignment``,
``batch``, ``state`` and ``tables``, ``poison`` and ``isolation``, ``recovery``, ``stage`` (the
one shape of a stage) and ``views`` (TableView and the views several stages read). Leaves out
what a stage processes (``consumers``, ``producers``).
"""
