"""The benchmarks behind the book's measured figures, and the measuring tools they share.

* :mod:`~attncourse.benchmarks.measure`: timing, peak memory, FLOP counts (chapter 7).
* :mod:`~attncourse.benchmarks.common`: the machine a run was on, where results are written
  (the working directory) and where the committed ones live.
* :mod:`~attncourse.benchmarks.attention`: attention implementations against L, and the KV
  cache's decoding step (chapters 6 and 7).
* :mod:`~attncourse.benchmarks.kernels`: chapter 10's Triton kernels on a GPU, chapter 8's
  adaptive span on the CPU.

Run them with ``python -m attncourse.benchmarks`` (``--help`` lists the options).
"""
