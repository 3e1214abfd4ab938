// An Azure Monitor workbook, per hour: case events handled, effects by status, reconciliations by
// outcome, escalations, checkpoint failures, dead letters and the webhook's p50/p95 latency. Its content
// is workbook.json (tests/unit/test_workbook.py checks every name its queries use against the code);
// the two resource ids it queries are filled in here.

param location string
param tags object

@description('Display name of the workbook; unique among the resource group\'s workbooks.')
param displayName string

@description('Log Analytics workspace of the Application Insights component: the queries\' scope.')
param logAnalyticsWorkspaceId string

@description('Service Bus namespace whose DeadletteredMessages the workbook charts.')
param serviceBusNamespaceId string

// workbook.json names the resources it queries by placeholders; these are this deployment's ids.
var workbookWithWorkspace = replace(loadTextContent('workbook.json'), '__LOG_ANALYTICS_WORKSPACE_ID__', logAnalyticsWorkspaceId)
var content = replace(workbookWithWorkspace, '__SERVICE_BUS_NAMESPACE_ID__', serviceBusNamespaceId)

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  // A workbook's resource name is a GUID; this one is stable per resource group and workspace.
  name: guid(resourceGroup().id, logAnalyticsWorkspaceId, 'casekeeper-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    version: 'Notebook/1.0'
    sourceId: logAnalyticsWorkspaceId
    serializedData: content
  }
}

output id string = workbook.id
