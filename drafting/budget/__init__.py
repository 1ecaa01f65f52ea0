"""How many draft nodes pay for themselves: tree selection by expected tokens per second, acceptance estimates, online row budgets."""
