/* rrpc-doctor: the library's QoS classes and their default DSCPs, read from the library's own
 * table (rrpci_class_defaults in libroce_rpc/core/class.c), so the class -> DSCP half of the
 * class -> DSCP -> priority mapping has one definition; the DSCP -> priority half is
 * dcbp_default_prio() / dcbp_effective_prio() in dcb_parse.c. */
#ifndef RRPC_DOCTOR_CLASSES_H
#define RRPC_DOCTOR_CLASSES_H

/* The number of classes. */
int doctor_class_count(void);
/* Class @i (0 .. doctor_class_count() - 1): its name ("control", ...) and default DSCP. */
const char *doctor_class_name(int i);
int doctor_class_dscp(int i);

#endif
