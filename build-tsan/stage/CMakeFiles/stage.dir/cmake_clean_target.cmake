file(REMOVE_RECURSE
  "libstage.a"
)
