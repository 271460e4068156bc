"""Tensor names of the streaming codec chunk graphs: the contract between the converter that
writes them (convert/codec_stream.py) and the runtime that feeds them (engine/codec_stream.py,
native/src/codec_stream.cpp). docs/MODEL.md §8.3."""

STATE = "state."  # input tensor names: STATE + state name
NEXT = "next."  # output tensor names: NEXT + state name
FRAMES = "frames"  # steady graphs: input [B] i64, the chunk's real frames (1..n)
