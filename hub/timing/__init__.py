"""How long a client's step takes, and every device that makes asking cheap.

The step-time formula, the timing cache shared by clients of one session, lookahead (forecasts of
the batches that follow) and decode runs. Results are byte-identical with every device off.
"""
