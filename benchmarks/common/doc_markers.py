"""Pages written by hand except for a generated part between two marker lines (docs/eflops.md,
docs/reliability.md): the generated part is replaced, the rest kept."""


def replace_between(text, begin, end, body):
    """`text` with what stands between the first `begin` and the `end` after it replaced by `body`
    (on lines of its own); None when either marker is missing."""
    if begin not in text or end not in text:
        return None
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + body + "\n" + end + tail
