"""What a pipeline left under a run root, to compare before and after."""


def file_bytes(root):
    """Every file under `root` (relative path -> bytes) and every directory, empty ones included."""
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}
