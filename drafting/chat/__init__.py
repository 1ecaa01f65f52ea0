"""A conversation whose KV cache is kept between turns."""
