"""An ImageFolder set's files, as the bench scripts read it: DATA/train/<class>/<file> (or
DATA/<class>/<file>), classes numbered in sorted order, files sorted within each class."""
import os


def walk(data):
    """(root, [(path, label)]): root is DATA/train where there is one, else DATA; each path is
    root/<class>/<file>."""
    root = os.path.join(data, "train") if os.path.isdir(os.path.join(data, "train")) else data
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    items = []
    for label, c in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, c))):
            items.append((os.path.join(root, c, name), label))
    return root, items
