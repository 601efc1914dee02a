"""Chat ingress: what a person writes in a configured chat becomes a turn of that chat's
conversation (DESIGN.md §5 "Conversations"). ``updates`` reads the Bot API's answers (pure,
total), ``telegram`` asks for them, ``inbox`` persists the offset and the messages waiting for a
turn, ``ingress`` runs the polls and the turns. Delivering the answer is the dispatch core's
``reply`` (a ``send`` through the outbox); other chat kinds can come behind the same seam."""
