"""The embedded demo (``make demo``): seed data and a steady trickle of jobs. It sits on top of
every other app and nothing imports it."""
