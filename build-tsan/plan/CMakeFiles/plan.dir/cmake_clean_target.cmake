file(REMOVE_RECURSE
  "libplan.a"
)
