// Package ironictest is an in-process OpenStack Ironic API for tests: just the node endpoints for power and NMI,
// answering as Ironic documents them (https://docs.openstack.org/api-ref/baremetal/):
//
//	GET /v1/nodes/{uuid}               200 with the node, 404 for an unknown node
//	PUT /v1/nodes/{uuid}/states/power  {"target": "power on"|"power off"|"soft power off"|...} → 202,
//	                                   409 while the node is locked by another conductor operation
//	PUT /v1/nodes/{uuid}/management/inject_nmi  {} → 204 (microversion 1.29), 400 for a node whose driver
//	                                   cannot (WithoutNMI), 409 while locked
//
// with microversion negotiation (X-OpenStack-Ironic-API-Version, 406 for a version out of range), optional
// HTTP basic auth (401 without the right credentials), and Ironic's error body. A fluent builder sets it
// up, and Requests records what it received:
//
//	srv := ironictest.NewServer(t).WithBasicAuth("admin", "pw").WithNode(uuid, ironictest.PowerOn)
//	srv.LockNode(uuid, 2) // the next two power requests get 409
package ironictest
