"""Weight formats applied at load time (one file per format, each a drafting.weights.weight_format.WeightFormat,
listed once in drafting.weights.formats) and the probe that picks the fastest exact one."""
