/*
 * The registry of live loaders, process-wide (registry.c says why). A
 * loader takes part through the node it embeds.
 *
 * Ownership. registry.c writes both fields: next under the registry's
 * lock, forked in a child of fork() (before the child runs anything else,
 * so every later plain read sees it).
 */
#ifndef SL_PIPELINE_REGISTRY_H
#define SL_PIPELINE_REGISTRY_H

typedef struct sl__reg {
    struct sl__reg *next; /* (the registry's lock) */
    int forked;           /* this is a child of fork() and the node was registered at the fork */
} sl__reg;

void sl__registry_add(sl__reg *r);
/* 1 if r was registered (and is no longer), 0 if it was not. */
int sl__registry_remove(sl__reg *r);
/* 1 with the registry locked if r is a live loader's node, else 0
 * (unlocked): for calls that must not touch a destroyed loader (r may
 * point anywhere; it is only compared). sl__registry_leave unlocks. Lock
 * order: the registry, then the loader's locks. */
int sl__registry_enter(const sl__reg *r);
void sl__registry_leave(void);

#endif
