"""``python -m populora ...``: the ``populora`` command, the same entry as the installed script.

It goes through ``populora_platform.main`` as the script does: that module (outside this package) first checks that
``import populora`` is this distribution's package and not PyPI's ``populora``, another project with the same
import name (populora_platform.py says why). Jobs and Ray Jobs start ``python -m populora.cli``, which skips the
check: they run the interpreter that launched them.
"""

from populora_platform import main

if __name__ == "__main__":
    main()
