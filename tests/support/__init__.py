"""What the tests share: tiny random models, the CLI as a subprocess, screen text, trace fixtures and the sampling reference."""
