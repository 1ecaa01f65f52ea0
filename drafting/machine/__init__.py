"""What this machine costs and how busy it is: verify cost curves, their watch, the load meter, identity, thread sharing, the doctor's table."""
