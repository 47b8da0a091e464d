"""Development tools that are not part of the product package (the simulated cluster)."""
