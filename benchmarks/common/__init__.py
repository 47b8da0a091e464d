"""What more than one benchmark suite uses: repository paths, number formatting, the machine's
description, the peer environment's location and the worker records' file format."""
