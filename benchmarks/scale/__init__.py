"""The scale benchmark (issue 27): engine ranks without a framework, 16 to 256 of them, across 16
simulated hosts; today's star/full-mesh design beside the hierarchical one; a calibrated model."""
