"""The pieces of ``koordctl``: the debug-API commands (:mod:`.commands`), their output (:mod:`.render`), the
flags every daemon command shares (:mod:`.flags`) and shell completion (:mod:`.completion`)."""
