"""The course's machinery: what shows, records and checks the lessons, kept apart from the lesson code.

    style, plotting, shapes   the course's figure style and its figures (matplotlib)
    layer_arrows, diagram     the drawing of the layer, every arrow with the shape it carries (chapter 3)
    drawings                  what the chapters' panels draw, and the values their sliders offer
    widgets                   live panels for a running notebook (ipywidgets)
    precomputed, panels       panels that work on the website with no kernel: the grid, the chapters' panels
    heads_panel               chapter 15's panel of a real model's heads
    notebook                  recording values for the text (glue), listings, stored results
    seeds                     the tables of training runs over seeds
    exercises                 the exercise checkers, one module per chapter

Each module answers to its short name too: ``M.plotting``, ``import mha_lessons.notebook``,
``from mha_lessons.exercises import check_band_mask`` (``mha_lessons/__init__.py`` makes the alias),
so a new machinery module needs only its file here: ``course/quiz.py`` is ``M.quiz``. The arrows point
one way: these modules import the lesson code (``mha_lessons/*.py``), never the other way round
(``tests/test_layout.py``).
"""
