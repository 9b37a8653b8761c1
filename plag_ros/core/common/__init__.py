"""What every concept of the core uses: no import of any other core package.

* :mod:`.options`: a configuration field that is also a user option (default, unit, range),
  so node parameters are generated from the dataclasses, never written twice;
* :mod:`.rejections`: counted, rate-limited logging of rejected input.
"""
