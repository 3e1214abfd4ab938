"""What each function does, independent of the Functions host: plain values in, plain results out.

The triggers in ``shared.functions`` only translate ``azure.functions`` objects to and from these.
"""
