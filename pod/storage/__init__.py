"""The pod's disk traffic: the order it reads inputs and writes outputs, and the lanes that do it."""
