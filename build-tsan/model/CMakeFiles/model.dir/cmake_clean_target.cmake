file(REMOVE_RECURSE
  "libmodel.a"
)
