"""Loading models: the embedded default, packaged GGUFs, local folders and hub ids, a caller's own model object, and text in and out."""
