"""The course's scaffolding: the toy tasks the chapters train on, and the text corpus.

Not part of the attention library: :mod:`attncourse` itself never imports this package.

* :mod:`~attncourse.course.toy_translation`: number words to digits (chapter 4).
* :mod:`~attncourse.course.text`: the Shakespeare corpus and its character tokenizer (chapters 5, 6).
* :mod:`~attncourse.course.span_task`: the near/far copy task (chapter 8).
* :mod:`~attncourse.course.lookup_task`: the lookup language (chapter 9).
* :mod:`~attncourse.course.runtime`: torch's threads (chapters 4 to 11) and chapter 10's kernels.
"""
