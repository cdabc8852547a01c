"""frtrace: find the rank that desynced a hung PyTorch job from its Flight Recorder dumps."""

__version__ = "0.1.0"
