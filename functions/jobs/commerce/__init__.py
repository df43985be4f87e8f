"""Commerce API jobs (seeds 000 and 001): recovery, retention and the payment safety net."""
