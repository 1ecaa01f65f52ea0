"""Weight formats applied at load time (one file per format) and the probe that picks the fastest exact one."""
