"""The elastic suite: how fast elastic horovodrun reacts to a new host and to a dead worker."""
